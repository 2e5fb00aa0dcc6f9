# deprecated: use util.load
def helper():
    return None
