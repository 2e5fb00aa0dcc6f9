# b.py: sample data for count-extensions
