"""The executor side: runs in executors' Python workers, one task at a time.

Reads exactly a batch's offset ranges into Arrow record batches, with consumers pooled per
worker between tasks.
"""
