#!/usr/bin/env bash
# The main job on the bundled sample data: set up, convert the sample Android UI traces into llm4mobile Episodes,
# show what was produced, import them into a study, record two environment episodes, export a training dataset,
# then start the annotator over all of it (skip that last step with STEPMARK_NO_ANNOTATE=1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
export MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa TF_CPP_MIN_LOG_LEVEL=2
SM=.venv/bin/stepmark
DATA="${STEPMARK_DATA:-$ROOT/stepmark-data}"
OUT="${STEPMARK_DEMO_OUT:-$ROOT/demo-output}"
rm -rf "$OUT/ui-episodes" "$OUT/procgen-rlds"
mkdir -p "$OUT"

echo "== 1. Convert the sample UI traces (samples/) with Apache Beam =="
$SM convert-ui samples/ui "$OUT/ui-episodes"

echo "== 2. What was produced =="
$SM inspect "$OUT/ui-episodes"

echo "== 3. Import the UI episodes into the store as a study =="
$SM import-ui "$OUT/ui-episodes" --study "Sample UI traces" --data "$DATA" | tail -n 3

echo "== 4. Record two Procgen episodes with a random policy =="
STUDY=$($SM study create schemas/examples/procgen_study.yaml --data "$DATA" | tail -n 1)
$SM record --study "$STUDY" --env maze --episodes 2 --policy random --seed 0 --data "$DATA"

echo "== 5. Export them as an envlogger/RLDS dataset =="
$SM export --data "$DATA" --study "$STUDY" --format envlogger --out "$OUT/procgen-rlds"

echo
echo "Converted UI episodes: $OUT/ui-episodes   store and episode files: $DATA   dataset: $OUT/procgen-rlds"
if [ "${STEPMARK_NO_ANNOTATE:-0}" != "1" ]; then
  echo "== 6. Starting the annotator over this data (Ctrl-C to stop) =="
  exec $SM annotate --data "$DATA"
fi
