a.py
