# call 5: a cold solution grade (per-process gate, guards) with the profile; the stub grade; attacks+confine as ccuser
bash .diag/gpu.sh env:30 >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD CXX=/opt/gcc/bin/g++ TORCH_CUDA_ARCH_LIST=9.0a PATH=/usr/local/cuda/bin:$PATH
export R=$OUT/p; mkdir -p $R
bash benchmarks/grade_profile.sh gsol_final /tmp/ccb-g5 --impl solution > $R/gsol.summary 2>&1
s=$(date +%s.%N); CUDA_COURSE_BUILD=/tmp/ccb-g6 timeout 120 python3 -m cudacourse grade --json $R/gstub.json > $R/gstub.log 2>&1
echo "stub grade wall $(python3 -c "import time;print(round(time.time()-$s,1))") s" >> $R/gstub.log
source .diag11/lead/asuser.sh > $R/asuser.log 2>&1
s=$(date +%s)
run_as "timeout 300 python3 -m pytest -p no:cacheprovider tests/test_grader_attacks.py tests/test_confine.py --impl=solution -q -n 8 --dist loadgroup -rfs --tb=short --basetemp=/tmp/ccuser-pt1 2>&1 | tail -30" > $R/attacks.log 2>&1
echo "attacks+confine as ccuser: $(( $(date +%s) - s )) s" >> $R/attacks.log
cd $OUT && tar czf p.tgz p && rm -rf p
