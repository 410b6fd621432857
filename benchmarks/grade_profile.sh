# usage (GPU machine, course installed; R = output folder): R=out bash benchmarks/grade_profile.sh NAME BUILD_DIR [grade args]
# A timestamped grade, with the CPU seconds of every process category per second (grade_cpu_sampler.py) and vmstat.
name=$1; bd=$2; shift 2
rm -f /tmp/stop-sampler
python3 benchmarks/grade_cpu_sampler.py $R/$name.cpu &
sp=$!
vmstat 1 > $R/$name.vmstat &
vp=$!
s=$(date +%s.%N)
CUDA_COURSE_BUILD=$bd timeout 400 python3 -u -m cudacourse grade "$@" --json $R/$name.json 2>&1 | python3 -u -c "import sys,time; t=time.time(); [print(f\"{time.time()-t:6.1f} {l}\", end=\"\", flush=True) for l in sys.stdin]" > $R/$name.log
echo "$name: wall $(python3 -c "import time;print(round(time.time()-$s,1))") s"
touch /tmp/stop-sampler; kill $vp; wait $sp
tail -1 $R/$name.cpu
grep -E "grade done|total:" $R/$name.log
