#!/bin/bash
set -e
cd /app/calc
git -c user.name=Agent -c user.email=agent@example.com revert --no-edit HEAD
