unchanged("docs/todo.txt", "fix login timeout\nupdate harbor map\ndone: write release notes\n")

print("PASS")
