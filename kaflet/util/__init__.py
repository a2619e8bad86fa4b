"""Small pieces every layer may use (the lowest layer: it imports no other kaflet package)."""
