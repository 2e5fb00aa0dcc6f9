def load():
    return "ok"
