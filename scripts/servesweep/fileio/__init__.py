"""Files read and written safely: strict YAML with limits, atomic writes, canonical text, and
problems reported as file + field + reason."""
