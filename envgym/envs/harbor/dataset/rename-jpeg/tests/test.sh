#!/bin/bash
# Reward 1 when the four .jpeg files are .jpg with their content and the rest is untouched.
mkdir -p /logs/verifier
if [ "$(cd /app/photos && ls | sort | tr "\n" " ")" = "beach.jpg city.jpg dog.jpg logo.png notes.txt sunset.jpg " ] && [ "$(cat /app/photos/dog.jpg)" = dog ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
