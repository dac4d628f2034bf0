"""procrl.data_builders"""
