#!/bin/bash
# A cleanup script beside a run script (written for these tests).
export WORKLOAD_NAME="wan-run"
xpk storage detach ${WORKLOAD_NAME}-data --cluster=c --zone=z
xpk workload delete --workload=${WORKLOAD_NAME} --cluster=c --zone=z
