"""Reading sniffed-qk datasets and computing the seeds' per-head metrics (numpy)."""
