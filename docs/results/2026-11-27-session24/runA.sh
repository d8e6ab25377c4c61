#!/bin/bash
# Session 24, run A: b = 71dc494 (main at the session's start, three host commits not yet run on a GPU), c = the
# s24 working tree (the server's chains two tiles a round with the query's norm chain a half behind, u32 ring
# places, the server's statistics kept in registers). c: knn1 diff-test in full and the whole quick diff-test;
# b and c alternated: one query x 1,000 / 10,000 rows x 768, top-10, Engine::knn_in served and launched, three
# rounds (torch in the first); memcheck / synccheck over c's quick knn1 group.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s24A}
B=$(mktemp -d); for x in b c; do xz -dc .device-carry/recall-$x.xz > $B/$x; chmod +x $B/$x; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 200 $B/c diff-test --arch sm_90 --group knn1 > $W/diff-knn1-c.txt 2>&1; echo "c knn1: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-c.txt | tail -1) $(( $(date +%s) - S0 ))s"
P=benches/peers/peers.py
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) answered $(grep -h 'servers answered' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) b0 $(grep -h "block 0" $f | cut -d'|' -f3 | tr '\n' ' ') $(grep -h 'torch.topk' $f | cut -d'|' -f3)"; }
for rep in 1 2 3; do for rows in 1000 10000; do for bin in b c; do for sv in on off; do left 380 || break
  PP=/none; [ $rep = 1 ] && [ $sv = off ] && [ $bin = b ] && PP=$P
  f=$W/q1-r$rows-$bin-$sv-$rep.md
  timeout 60 env RECALL_KNN1_SERVE=$sv $B/$bin bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script $PP --out $f > /dev/null 2>&1
  show $f "$rep x$rows $bin $sv"
done; done; done; done
left 420 && { timeout 150 $B/c diff-test --arch sm_90 --quick > $W/diff-quick-c.txt 2>&1; echo "c quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-c.txt | tail -1) $(( $(date +%s) - S0 ))s"; }
for tool in memcheck synccheck; do left 500 || break
  timeout 90 compute-sanitizer --tool $tool $B/c diff-test --quick --group knn1 > $W/$tool-knn1-c.txt 2>&1; echo "$tool: rc=$? $(grep -E 'ERROR SUMMARY' $W/$tool-knn1-c.txt | tail -1)"
done
echo "total $(( $(date +%s) - S0 )) s"
true
