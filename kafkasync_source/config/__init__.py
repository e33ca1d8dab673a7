"""Configuration: the source's options (parsed and validated once, on the driver), their
documentation, the librdkafka client settings they become (Java-style names and stores
translated) and the librdkafka log.
"""
