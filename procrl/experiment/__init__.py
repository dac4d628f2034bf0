"""procrl.experiment"""
