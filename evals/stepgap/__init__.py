"""procrl.evals.stepgap"""
