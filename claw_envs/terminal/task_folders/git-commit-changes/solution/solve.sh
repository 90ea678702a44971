#!/bin/bash
set -e
cd /app/project
git add README.md LICENSE
git -c user.name=Agent -c user.email=agent@example.com commit -qm "docs: add license"
