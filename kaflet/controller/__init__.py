"""The controller: election, topic and partition lifecycle, broker failure handling."""
