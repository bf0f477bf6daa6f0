"""The Redis control plane and the model lifecycle: thresholds, registry, archive, drift, retrain (never imports pipeline)."""
