"""The worker process: owns torch and the device, runs specs on warm engines."""
