"""K-DSM: kurtosis-guided denoising score matching for tabular anomaly detection."""
