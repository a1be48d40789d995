"""What a stack answers, beside how fast: the API smoke's request set and the accuracy benchmarks."""
