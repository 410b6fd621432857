# call 4: the setsid attack alone as ccuser (runtime thread fix, CCSIM_WORKERS share); the grader corpus on cuda as ccuser
bash .diag/gpu.sh env:30 >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD CXX=/opt/gcc/bin/g++ TORCH_CUDA_ARCH_LIST=9.0a PATH=/usr/local/cuda/bin:$PATH
export R=$OUT/p; mkdir -p $R
git log --oneline -1 > $R/commit.txt 2>&1
source .diag11/lead/asuser.sh > $R/asuser.log 2>&1
s=$(date +%s); run_as "timeout 150 python3 .diag11/lead/one_attack.py setsid-daemon-edits-later 2>&1 | tail -12" > $R/one_attack.log 2>&1
echo "one attack: $(( $(date +%s) - s )) s" >> $R/one_attack.log
s=$(date +%s)
run_as "CUDA_COURSE_BACKEND=cuda timeout 480 python3 -m pytest -p no:cacheprovider tests/test_grader.py::test_corpus --impl=solution -q -n 0 -rfs --tb=short -s --basetemp=/tmp/ccuser-pt2 2>&1 | tail -45" > $R/corpus_cuda.log 2>&1
echo "corpus (cuda) as ccuser: $(( $(date +%s) - s )) s" >> $R/corpus_cuda.log
cd $OUT && tar czf p.tgz p && rm -rf p
