"""Models: definitions of the models the lessons run (the tiny decoder, the digits classifier)."""
