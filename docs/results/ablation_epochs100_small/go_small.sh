#!/bin/bash
# usage: go_small.sh NAME SETTING SPLIT SEEDS [ENV...]  -- the default on the 11 datasets under 1000 rows, one worker
name=$1 setting=$2 split=$3 seeds=$4; shift 4
src=/work/exp/bench/src_$name; rm -rf $src; mkdir -p $src; (cd /work/main && git ls-files -co --exclude-standard | tar -cT - | tar -x -C $src)
out=/work/exp/bench/$name
ds=glass,Hepatitis,Ionosphere,Lymphography,Pima,vertebral,WBC,WDBC,wine,breastw,Stamps
cd $src && env "$@" KDSM_TRAIN__THREADS=1 PYTHONPATH=$src python3 -m streamer.ops.cli bench adbench --data-dir /work/shared/data/adbench \
     --setting $setting --split $split --seeds $seeds --methods default --datasets $ds --out $out > /work/exp/bench/$name.log 2>&1
