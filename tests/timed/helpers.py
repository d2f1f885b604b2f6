"""What the timed runs' tests share: a training step's spec and a kernel run's."""



from benchd.spec import parse_spec


def train_spec(**options):
    return parse_spec({"kind": "train_step", "name": "train", "model": "tiny", "device": "cpu",
                       "train_step": {"batch_size": 2, "context_length": 16, "warmup_steps": 2, "steps": 4,
                                      **options}})


def kernel_spec(**kernel):
    return parse_spec({"kind": "kernel", "name": "kern", "device": "cpu", "dtype": "float32",
                       "kernel": {"warmup": 2, "repeats": 5, "flush_bytes": 1 << 20, **kernel}})
