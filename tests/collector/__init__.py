"""The collector (bench/): cells, streams, faults, ground truth, secrets."""
