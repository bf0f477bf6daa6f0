"""Developer tooling: local broker + Redis, the demo, replay, benchmarks."""
