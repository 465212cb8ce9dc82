"""Node hardware health: the action vocabulary, NVIDIA's Xid catalogue and the published
thresholds for GPU and InfiniBand counters, kept as data next to the code that reads them."""
