unchanged(
    "config/settings.ini",
    "[server]\nhost = 127.0.0.1\nport = 8080\ndebug = false\n\n[map]\nzoom = 3\n",
)

print("PASS")
