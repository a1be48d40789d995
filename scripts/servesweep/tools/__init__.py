"""Setup helpers: the tiny local model and tokenizer, sample traces."""
