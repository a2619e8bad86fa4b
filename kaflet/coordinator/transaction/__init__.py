"""The transaction coordinator: transactional ids, their producer ids and epochs, and the
two-phase commit of a transaction's partitions through __transaction_state."""
