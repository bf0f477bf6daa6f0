"""The online service: Kafka in, alerts and dead letters out."""
