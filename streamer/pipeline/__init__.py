"""The hot loop: poll, decode, score, publish alerts and dead letters, commit offsets (imports neither lifecycle nor ops)."""
