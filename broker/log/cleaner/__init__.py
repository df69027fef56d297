"""The log cleaner (Kafka's LogCleaner): compaction of `cleanup.policy=compact` logs.

rules (pure: what is cleanable, which log goes first), batches (pure: the offset map and what
stays of each batch), cleaner (the I/O of one pass), throttle (log.cleaner.io.max.bytes.per.second
on KIP-73's rate), checkpoint (`cleaner-offset-checkpoint`), manager (the tasks and their schedule).
"""
