"""procrl.evals"""
