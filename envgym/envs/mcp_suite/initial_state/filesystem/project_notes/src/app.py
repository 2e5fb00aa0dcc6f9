from util import load

print(load())
