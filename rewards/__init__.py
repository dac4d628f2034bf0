"""procrl.rewards"""
