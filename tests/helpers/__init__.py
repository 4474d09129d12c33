"""Helpers the test modules share: graph builders, viewers' readers, and scripts the
tests run in subprocesses. Nothing here is collected as a test."""
