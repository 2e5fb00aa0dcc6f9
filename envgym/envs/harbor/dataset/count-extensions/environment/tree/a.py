# a.py: sample data for count-extensions
