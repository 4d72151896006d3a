"""Small helpers every layer uses: value checks, memos, seeds, safe text / YAML / torch loading, run
directories, progress, consoles."""
