#!/bin/sh
# scripts/device/env.sh -- the provenance lines a device script writes beside
# its measurements (date, commit, the command given as $1, GPU, driver,
# clocks, nvcc, torch, cuDNN), on standard output:
#     sh scripts/device/env.sh "<command>" > "$OUT/env.txt"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); commit: ${FA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}; command: ${1:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
nvcc --version 2>&1 | tail -n 2
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())" 2>&1
