b.py
