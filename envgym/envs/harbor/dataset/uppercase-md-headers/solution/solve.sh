#!/bin/bash
set -e
sed -i '/^#/ s/.*/\U&/' /app/notes.md
