"""procrl.trainers"""
