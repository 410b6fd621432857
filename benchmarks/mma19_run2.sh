#!/bin/bash
# Issue 17, branch mma19, second GPU call: the sweep with gemm_wgmma's shifted edge tiles in the solution (the
# unshifted copy beside it) and mma18's kernel with the early and the late stage hand-back (repeat test), then
# lesson 05's graded tests on the GPU, then ncu of the late hand-back kernel. Run from the repository root with
# PYTHONPATH=$PWD TORCH_CUDA_ARCH_LIST=9.0a; writes under $1.
O=$1
{ nvidia-smi; git log -1 --format=%H 2>/dev/null; } > $O/log.txt 2>&1
timeout 150 python3 benchmarks/mma19_sweep.py $O --parts wg,mma --repeat 30 \
    --variants mma_tma_128x256,mma_tma_256x128,mma_tma_128x256_late,mma_tma_256x128_late >> $O/log.txt 2>&1
echo "sweep rc $?" >> $O/log.txt
timeout 90 python3 -m pytest tests/test_05_tensor_cores.py -q -p no:cacheprovider --impl=solution --backend=cuda \
    > $O/pytest.txt 2>&1
echo "pytest rc $?" >> $O/log.txt
timeout 35 ncu --set full --clock-control none -k regex:mma_tma -o $O/ncu_late python3 benchmarks/mma19_ncu.py mma \
    mma_tma_256x128_late >> $O/log.txt 2>&1
echo "ncu rc $?" >> $O/log.txt
ncu -i $O/ncu_late.ncu-rep --page details > $O/ncu_mma_late.txt 2>&1
rm -f $O/ncu_late.ncu-rep
cat $O/mma19_wg_mma.md; tail -3 $O/pytest.txt; grep "rc " $O/log.txt
