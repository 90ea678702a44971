#!/bin/bash
set -e
cd /app/config
sed -i -e '/^ *\/\//d' -e 's/,\( *[]}]\)/\1/' -e 's/"pool": 10,/"pool": 10/' -e 's/"port": 8080/"port": 8081/' settings.json
python3 -m json.tool settings.json > /dev/null
