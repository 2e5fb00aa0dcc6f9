#!/bin/bash
set -e
sed -i '/^\[server\]/,/^\[/ s/^port = .*/port = 8080/' /app/config.ini
