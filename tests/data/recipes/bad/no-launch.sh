#!/bin/bash
# No launch command at all (written for these tests).
export PROJECT_ID=p
gcloud config set project "$PROJECT_ID"
