# e.py: sample data for count-extensions
