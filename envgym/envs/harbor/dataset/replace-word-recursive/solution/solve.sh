#!/bin/bash
set -e
find /app/docs -type f -name '*.txt' -exec sed -i -e 's/colour/color/g' -e 's/Colour/Color/g' {} +
