"""The hardware: GPUs through NVML, the host through psutil, the sampler that reads them, devices."""
