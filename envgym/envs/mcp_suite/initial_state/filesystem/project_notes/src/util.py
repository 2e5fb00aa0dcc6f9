def load():
    return 'ok'
