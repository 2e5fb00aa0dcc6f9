d / e.py
