#!/bin/bash
set -e
chmod a-x /app/bin/*
chmod +x /app/bin/*.sh
